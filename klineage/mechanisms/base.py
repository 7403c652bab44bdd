"""What every mechanism family provides: a detector, a deoptimize rewrite at one locus, and, where
the rewrite is mechanical, a reoptimize rewrite.

A *feature* is a (mechanism, locus) pair found in a kernel. Loci are named by content, not by
position: the enclosing function and the text of the code the mechanism sits on (e.g.
``rs_load4:load:p``), with ``#n`` appended only to tell identical texts apart. So removing one
feature leaves the loci of all the others unchanged, which is what makes the audit "exactly one
mechanism removed at the declared locus, all others kept" a set computation.

Rewrites return ``Applied`` or ``NotApplicable`` and never raise for a kernel they do not fit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from klineage.parse.kernel import Kernel


@dataclass(frozen=True)
class Feature:
    mechanism: str
    locus: str
    lines: tuple[int, int]
    anchor: str = ""          # anchor signature: what kind of code the mechanism sits on (lift groups by it)
    detail: tuple = ()        # sorted (key, value) pairs: carrier configuration seen (vector type, count, ...)
    removable: bool = True    # the family has a deoptimize for this feature
    path: str = ""            # human-readable path (function > loop > node)

    @property
    def key(self) -> tuple[str, str]:
        return self.mechanism, self.locus

    def info(self) -> dict:
        return dict(self.detail)

    def to_dict(self) -> dict:
        return {"mechanism": self.mechanism, "locus": self.locus, "lines": list(self.lines),
                "anchor": self.anchor, "detail": dict(self.detail), "removable": self.removable,
                "path": self.path}

    @classmethod
    def from_dict(cls, d: dict) -> "Feature":
        return cls(d["mechanism"], d["locus"], tuple(d["lines"]), d.get("anchor", ""),
                   tuple(sorted(d.get("detail", {}).items())), d.get("removable", True), d.get("path", ""))


def detail(**kw) -> tuple:
    return tuple(sorted(kw.items()))


@dataclass(frozen=True)
class Applied:
    """A rewrite that applied: the new source, the locus it acted on, the code before/after at the
    anchor, and the configuration the rewrite carries (what reoptimize needs to restore it)."""
    source: str
    mechanism: str
    locus: str
    before: str
    after: str
    config: dict = field(default_factory=dict)
    ok: ClassVar[bool] = True


@dataclass(frozen=True)
class NotApplicable:
    reason: str
    ok: ClassVar[bool] = False


Result = Applied | NotApplicable


def squash(text: str) -> str:
    """Whitespace-normalised text for locus names."""
    return re.sub(r"\s+", " ", text).strip()


def number_loci(items: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """Append #n to repeated locus names (in source order), leaving unique names bare."""
    seen: dict[str, int] = {}
    counts: dict[str, int] = {}
    for name, _ in items:
        counts[name] = counts.get(name, 0) + 1
    out = []
    for name, obj in items:
        if counts[name] > 1:
            seen[name] = seen.get(name, 0) + 1
            out.append((f"{name}#{seen[name]}", obj))
        else:
            out.append((name, obj))
    return out


class Mechanism:
    """One optimization family. Subclasses set NAME, DESCRIPTION, and implement the three methods."""
    NAME: ClassVar[str] = ""
    DESCRIPTION: ClassVar[str] = ""
    STRUCTURAL: ClassVar[bool] = False  # detected only; no rewrite exists
    DETECTABLE: ClassVar[bool] = True   # False: only a ladder or an LLM names it (no detector)
    # Static preconditions the mechanism implies, by category (data_types, layout, storage, pipeline,
    # hardware): what must hold, and what fails without it.
    PRECONDITIONS: ClassVar[dict[str, list[dict]]] = {}
    # How a compiler-evidence site meets a source feature of the family: "lines" (the site's lines fall
    # in the feature's span) or "function" (the site is in the feature's function, or inlined there).
    COMPILED_MATCH: ClassVar[str] = "lines"

    def detect(self, k: Kernel) -> list[Feature]:
        raise NotImplementedError

    def detect_more(self, k: Kernel) -> list[Feature]:
        """The idiom forms the family sees but its rewrites do not take (a cooperative-groups reduce, a
        grid-stride loop, a hint in hand-written PTX, ...): seen by the audit and `klineage features`,
        never proposed for removal (every one is removable=False)."""
        return []

    def compiled(self, ck) -> list:
        """The family's compiler-evidence signature: klineage.mechanisms.compiled.Site list for a
        CompiledKernel. Families the compiler cannot see (a padding, a count, a pragma) have none."""
        return []

    def deoptimize(self, k: Kernel, feature: Feature) -> Result:
        return NotApplicable(f"{self.NAME} has no deoptimize rewrite")

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None) -> Result:
        """Add the mechanism: at `locus` (a locus name as the detector would give it once added) or,
        when None, at the first matching place. `config` is the Applied.config of a deoptimize."""
        return NotApplicable(f"{self.NAME} has no mechanical reoptimize rewrite")

    def _find(self, k: Kernel, feature: Feature) -> Feature | None:
        return next((f for f in self.detect(k) if f.key == feature.key), None)


# What a family's mechanism can address: the bottleneck classes of klineage.apply.retrieve.bottleneck_of
BOTTLENECKS = ("memory", "compute", "latency")
# How a family's mechanism is written into a kernel: its own reoptimize, or a shape rewriter's
# structural rewrite (klineage.mechanisms.shapes)
FORWARD = ("reoptimize", "shape")


@dataclass(frozen=True)
class Form:
    """A source form a family recognises. `rewritable`: its deoptimize takes it (Mechanism.detect,
    what the rules walk proposes); otherwise it is seen only (Mechanism.detect_more): the audits and
    `klineage features` count it, no rule removes it."""
    text: str
    rewritable: bool = True


@dataclass(frozen=True)
class Family:
    """Everything KLineage knows about one mechanism family, declared once (a family module's
    `FAMILY = Family(...)`, or an entry of families/declared.toml). Detection, the audits, the walk,
    lift, retrieval, admission and the docs read it; nothing outside klineage.mechanisms names a
    family.

    mechanism     the Mechanism subclass: NAME, DESCRIPTION, PRECONDITIONS (what must hold, by
                  category), the detector(s) and rewrites
    rank          the family's place in the registry; among the rewritable families, the rules
                  walk's backward order (what sits on top of another comes off first)
    forms         the source forms it recognises, each rewritable or seen only; () for a family only a
                  ladder or an LLM names (no detector)
    compiler      what its compiler-evidence signature (Mechanism.compiled) reads in the PTX; "" when
                  the compiler cannot see it
    forward       how the mechanism is written in: ("reoptimize",), ("shape",), both, or ()
    anchor_query  the tree-sitter query of the code it sits on, shown on a skill card's anchor; "" when
                  no single query names it
    addresses     the bottleneck classes (BOTTLENECKS) it relieves: retrieval's bottleneck term. The
                  tensor-core and pipeline families declare none: the held-out runs recorded in
                  benchmarks/results/heldout_h200 ranked them so, and a class here reorders what their
                  search sweeps (their attention rows would no longer replay)
    rules         names of the static precondition rules (klineage.mechanisms.static.RULES) that
                  read its soundness off the richer kernel
    hardware      names of the hardware needs (klineage.mechanisms.static.HARDWARE) it may carry
    conflicts     (anchor, mechanism): what addresses the same cost in an incompatible way
    companions    mechanisms that enter a kernel with it in one step (a pipeline's copies and stages)
    replaces      mechanisms it takes over when it enters (asynchronous copies replace register staging)
    covers        names a ladder may declare for it (a ladder's `smem_tiling` is smem_staging)
    written_with  families a shape rewriter's structural step for it writes along (a register cache's
                  row count is a per-thread count, which the coarsening detector reads)
    scope         the targets (klineage.gate.compile.ARCHS) whose hardware has it; () for every target
    """
    mechanism: type[Mechanism]
    rank: int
    forms: tuple[Form, ...] = ()
    compiler: str = ""
    forward: tuple[str, ...] = ()
    anchor_query: str = ""
    addresses: frozenset[str] = frozenset()
    rules: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    conflicts: tuple[tuple[str, str], ...] = ()
    companions: frozenset[str] = frozenset()
    replaces: tuple[str, ...] = ()
    covers: tuple[str, ...] = ()
    written_with: tuple[str, ...] = ()
    scope: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.mechanism.NAME

    @property
    def description(self) -> str:
        return self.mechanism.DESCRIPTION

    @property
    def preconditions(self) -> dict[str, list[dict]]:
        return self.mechanism.PRECONDITIONS

    @property
    def rewritable(self) -> bool:
        """Whether the rules walk can take the mechanism out (some form is rewritable)."""
        return any(f.rewritable for f in self.forms)

    def builds_for(self, arch: str) -> bool:
        """Whether a target has the mechanism's hardware (an arch outside `scope` does not)."""
        return not self.scope or arch in self.scope
