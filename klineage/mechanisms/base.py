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
    # Families a shape rewriter's structural step for this mechanism writes with it (audit_structural):
    # a register cache's row is a compile-time per-thread count, which the coarsening detector reads.
    # A ladder rung bundling the two is still two steps (its compound step peels the other off first).
    WRITTEN_WITH: ClassVar[tuple[str, ...]] = ()

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
