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

__all__ = ["Shape", "ShapeRewriter", "register", "rewriters", "structural_rewrite"]

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
