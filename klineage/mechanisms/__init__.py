"""The mechanism registry: one module per optimization family (the structural detectors: a few
modules, by kind).

``ORDER`` is the backward search order of the rules proposer: mechanisms that sit on top of others
come off first (a cache hint wraps a load, so it goes before the vectorized load it wraps; compiler
annotations before the code structure they annotate), then the structural-but-mechanical
families. Within one family, loci are tried in source order.
"""
from __future__ import annotations

import hashlib
import importlib
from collections import OrderedDict

from klineage.mechanisms.base import Applied, Feature, Kernel, Mechanism, NotApplicable

ORDER = (
    "cache_hint", "fast_math", "launch_bounds", "unroll", "restrict", "coarsening",
    "smem_padding", "vector_access", "warp_reduction", "smem_staging",
)
# family -> its modules under klineage.mechanisms, in the order their mechanisms are registered
_MODULES = {
    "cache_hint": ("cache_hint",), "fast_math": ("fast_math",), "launch_bounds": ("launch_bounds",),
    "unroll": ("unroll",), "restrict": ("restrict",), "coarsening": ("coarsening",),
    "smem_padding": ("smem_padding",), "vector_access": ("vector_access",), "warp_reduction": ("warp_reduction",),
    "smem_staging": ("smem_staging",),
    "structural": ("structural.pipeline", "structural.dataflow", "structural.declared"),
}


def _load(name: str) -> list[Mechanism]:
    """The family's mechanisms: each module's Mechanism subclasses with a NAME defined there (not
    imported), in definition order, module by module."""
    out = []
    for module in _MODULES[name]:
        mod = importlib.import_module(f"klineage.mechanisms.{module}")
        out += [obj() for obj in vars(mod).values()
                if isinstance(obj, type) and issubclass(obj, Mechanism) and obj is not Mechanism
                and obj.__module__ == mod.__name__ and obj.NAME]
    return out


def registry() -> dict[str, Mechanism]:
    """Every mechanism by NAME: the rewritable families in ORDER, then the structural detectors."""
    out: dict[str, Mechanism] = {}
    for name in (*ORDER, "structural"):
        for m in _load(name):
            if m.NAME in out:
                raise RuntimeError(f"two mechanisms named {m.NAME}: give each family its own NAME")
            out[m.NAME] = m
    return out


_DETECTED: OrderedDict[str, tuple[Feature, ...]] = OrderedDict()
_DETECTED_MAX = 4096


class Features(list):
    """A kernel's features (a list of Feature) that remembers the source they were read from, so the
    audit can add the compiler's evidence of the same source (klineage.mechanisms.evidence)."""

    def __init__(self, items=(), source: str | None = None):
        super().__init__(items)
        self.source = source


def detect_all(source: str | Kernel) -> Features:
    """All features the source detectors find in a kernel, every family, in registry order then
    source order; the list carries the source text (`.source`).

    Detection is a pure function of the source text, and a mining run asks for the same kernel's
    features many times (the walk, every admission target of every skill), so the last
    _DETECTED_MAX answers are kept, keyed by the text's digest. Features are frozen; each caller
    gets its own list."""
    k = source if isinstance(source, Kernel) else Kernel(source)
    key = hashlib.sha256(k.source.encode()).hexdigest()
    hit = _DETECTED.get(key)
    if hit is not None:
        _DETECTED.move_to_end(key)
        return Features(hit, k.source)
    feats: list[Feature] = []
    for m in registry().values():
        feats.extend(m.detect(k))
    _DETECTED[key] = tuple(feats)
    while len(_DETECTED) > _DETECTED_MAX:
        _DETECTED.popitem(last=False)
    return Features(feats, k.source)


_SEEN: OrderedDict[str, tuple[Feature, ...]] = OrderedDict()


def detect_seen(source: str | Kernel) -> Features:
    """Every feature the source detectors see: detect_all's (the forms the rewrites work on, what a
    walk stores and proposes from) and, after them, each family's other idiom forms
    (Mechanism.detect_more: seen, not removable). The united evidence and `klineage features` read
    this; cached like detect_all."""
    k = source if isinstance(source, Kernel) else Kernel(source)
    key = hashlib.sha256(k.source.encode()).hexdigest()
    hit = _SEEN.get(key)
    if hit is None:
        more: list[Feature] = []
        for m in registry().values():
            more.extend(m.detect_more(k))
        hit = tuple(detect_all(k)) + tuple(more)
        _SEEN[key] = hit
        while len(_SEEN) > _DETECTED_MAX:
            _SEEN.popitem(last=False)
    else:
        _SEEN.move_to_end(key)
    return Features(hit, k.source)


__all__ = ["Applied", "Feature", "Features", "Kernel", "Mechanism", "NotApplicable", "ORDER", "registry", "detect_all", "detect_seen"]
