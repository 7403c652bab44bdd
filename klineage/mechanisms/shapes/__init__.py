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

__all__ = ["Shape", "ShapeRewriter", "forward_states", "knows", "operator_class", "reachable_mechanisms",
           "recognises", "register", "retyped_mechanisms", "rewriters", "shape_mechanisms", "structural_rewrite"]

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


_READ: dict = {}


def _shapes(source: str, workload=None) -> list[tuple[ShapeRewriter, Shape]]:
    """(rewriter, Shape) of every rewriter that recognises `source` (the last few reads kept)."""
    key = (source, getattr(workload, "content_hash", None) or getattr(workload, "name", None),
           tuple(id(rw) for rw in rewriters()))
    if key not in _READ:
        if len(_READ) > 64:
            _READ.clear()
        _READ[key] = [(rw, shape) for rw in rewriters()
                      if isinstance(shape := rw.recognise(source, workload), Shape)]
    return _READ[key]


def _facts_union(source: str, workload, key: str) -> set[str]:
    """The union of facts[key] over the rewriters that recognise `source`."""
    out: set[str] = set()
    for _, shape in _shapes(source, workload):
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


def reachable_mechanisms(source: str, workload=None) -> set[str]:
    """The mechanisms of every shape rewriter that recognises `source`, less those its shape refuses
    (Shape.facts["refuses"]: a strided row takes no warp per row): those a structural rewrite may add
    to it (a rewrite still refuses what does not fit, with its reason)."""
    return {m for rw, shape in _shapes(source, workload) for m in rw.mechanisms
            if m not in (shape.facts.get("refuses") or ())}


def operator_class(source: str, workload=None) -> str:
    """What `source` computes, as the recognisers read it: the first recognising shape rewriter's
    class (its Shape.facts["operator"], else its name: "matmul", "row_reduction",
    "strided_reduction"), "elementwise" for a kernel of one element per thread the elementwise
    reader takes, "" when nothing reads it."""
    for rw, shape in _shapes(source, workload):
        return shape.facts.get("operator") or rw.name
    from klineage.mechanisms.base import Kernel
    from klineage.mechanisms.elementwise import flat_kernels
    try:
        return "elementwise" if flat_kernels(Kernel(source))[0] else ""
    except Exception:  # a source the elementwise reader trips on is not one it reads
        return ""


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
