"""The mechanism registry: one module or package per optimization family under
klineage.mechanisms.families, discovered there (the families only a ladder names: one module).

``ORDER`` is the backward search order of the rules proposer: mechanisms that sit on top of others
come off first (a cache hint wraps a load, so it goes before the vectorized load it wraps; compiler
annotations before the code structure they annotate), then the structural-but-mechanical
families. Within one family, loci are tried in source order.
"""
from __future__ import annotations

import hashlib
import importlib
import pkgutil
from collections import OrderedDict

from klineage.mechanisms.base import Applied, Feature, Kernel, Mechanism, NotApplicable

ORDER = (
    "cache_hint", "fast_math", "launch_bounds", "unroll", "restrict", "coarsening",
    "smem_padding", "vector_access", "warp_reduction", "smem_staging",
)
# where the discovered families sit in the registry: the rewritable families in ORDER, then the
# structural ones in this order; a family module not named here comes after, by module name
_STRUCTURAL_ORDER = (
    "tensor_core_mma", "wgmma", "async_copy", "tma", "multistage_buffer", "warp_specialization",
    "online_softmax", "smem_swizzle", "register_tiling", "thread_block_cluster", "declared",
)
FAMILIES_PACKAGE = "klineage.mechanisms.families"


def family_modules() -> list[str]:
    """The family modules under klineage.mechanisms.families (a module, or a package's __init__), in
    registry order; a name starting with `_` holds shared helpers, not a family."""
    pkg = importlib.import_module(FAMILIES_PACKAGE)
    names = [m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]
    rank = {n: i for i, n in enumerate((*ORDER, *_STRUCTURAL_ORDER))}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def _load(module: str) -> list[Mechanism]:
    """A family module's mechanisms: its Mechanism subclasses with a NAME defined there (not
    imported), in definition order."""
    mod = importlib.import_module(f"{FAMILIES_PACKAGE}.{module}")
    return [obj() for obj in vars(mod).values()
            if isinstance(obj, type) and issubclass(obj, Mechanism) and obj is not Mechanism
            and obj.__module__ == mod.__name__ and obj.NAME]


def registry() -> dict[str, Mechanism]:
    """Every mechanism by NAME: the rewritable families in ORDER, then the structural detectors."""
    out: dict[str, Mechanism] = {}
    for module in family_modules():
        for m in _load(module):
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
