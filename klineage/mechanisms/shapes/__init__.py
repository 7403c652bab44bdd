"""Structural rewrites by computational shape.

A shape rewriter recognises *what* a kernel computes (a row-wise reduction or normalisation, a tiled
matrix product) from its source, and writes a structural skill's mechanism into it as a forward
rewrite: the kernel with that mechanism added and everything else kept, so the detectors' audit can
check it. Correctness is the gate's business, not the rewriter's.

Every module of this package that defines a `ShapeRewriter` subclass decorated with `@register` is
found on first use; `structural_rewrite` asks each rewriter that knows the mechanism.
"""
from __future__ import annotations

import importlib
import pkgutil

from klineage.mechanisms.base import Applied, NotApplicable
from klineage.mechanisms.shapes.base import REGISTRY, Shape, ShapeRewriter, register

__all__ = ["Shape", "ShapeRewriter", "forward_states", "knows", "recognises", "register", "retyped_mechanisms",
           "rewriters", "shape_mechanisms", "structural_rewrite"]

_loaded = False


def rewriters() -> list[ShapeRewriter]:
    """Every registered shape rewriter, its module imported on first use, in name order."""
    global _loaded
    if not _loaded:
        for mod in pkgutil.iter_modules(__path__):
            if mod.name != "base":
                importlib.import_module(f"{__name__}.{mod.name}")
        _loaded = True
    return sorted(REGISTRY, key=lambda r: r.name)


def structural_rewrite(mechanism: str, source: str, config: dict | None = None, workload=None) -> Applied | NotApplicable:
    """`mechanism` written into `source` by the first rewriter that knows it and recognises the
    kernel's shape; NotApplicable naming every rewriter's reason otherwise. Never raises."""
    reasons = []
    for rw in rewriters():
        if mechanism not in rw.mechanisms:
            continue
        shape = rw.recognise(source, workload)
        if isinstance(shape, NotApplicable):
            reasons.append(f"{rw.name}: {shape.reason}")
            continue
        res = rw.rewrite(source, shape, mechanism, dict(config or {}), workload)
        if isinstance(res, Applied):
            return res
        reasons.append(f"{rw.name}: {res.reason}")
    return NotApplicable("; ".join(reasons) or f"no shape rewriter adds {mechanism}")


def knows(mechanism: str) -> bool:
    """Whether some shape rewriter can add `mechanism`."""
    return any(mechanism in rw.mechanisms for rw in rewriters())


def recognises(mechanism: str, source: str, workload=None) -> bool:
    """Whether a shape rewriter that adds `mechanism` recognises `source` as a kernel of its shape."""
    return any(mechanism in rw.mechanisms and isinstance(rw.recognise(source, workload), Shape)
               for rw in rewriters())


def _facts_union(source: str, workload, key: str) -> set[str]:
    """The union of facts[key] over the rewriters that recognise `source`."""
    out: set[str] = set()
    for rw in rewriters():
        shape = rw.recognise(source, workload)
        if isinstance(shape, Shape):
            out |= set(shape.facts.get(key) or ())
    return out


def shape_mechanisms(source: str, workload=None) -> set[str]:
    """The structural mechanisms the shape rewriters read in `source` (each recogniser's
    facts["mechanisms"]; nothing from a rewriter that does not recognise it)."""
    return _facts_union(source, workload, "mechanisms")


def retyped_mechanisms(source: str, workload=None) -> set[str]:
    """The mechanisms a shape rewriter that recognises `source` writes for its own element type whatever
    the element type of the kernels they were mined from (Shape.facts["retyped"]: the matmul generator
    writes the whole kernel at the plan's element type)."""
    return _facts_union(source, workload, "retyped")


def forward_states(source: str, workload=None, skip: str | None = None) -> list[tuple[str, list[str]]]:
    """Kernels reached from `source` by each recognising rewriter's `ladder`, one mechanism at a time
    with the rewriter's defaults (a mechanism that does not apply is passed over; `skip` is never
    added): [(source, mechanisms added so far)], simplest first, `source` itself not included."""
    out: list[tuple[str, list[str]]] = []
    for rw in rewriters():
        if not rw.ladder or isinstance(rw.recognise(source, workload), NotApplicable):
            continue
        cur, added = source, []
        for mech in rw.ladder:
            if mech == skip:
                continue
            shape = rw.recognise(cur, workload)
            if isinstance(shape, NotApplicable):
                break
            res = rw.rewrite(cur, shape, mech, {}, workload)
            if isinstance(res, Applied):
                cur, added = res.source, added + [mech]
                out.append((cur, list(added)))
    return out
