"""The mechanism registry: one module per optimization family.

``ORDER`` is the backward search order of the rules proposer: mechanisms that sit on top of others
come off first (a cache hint wraps a load, so it goes before the vectorized load it wraps; compiler
annotations before the code structure they annotate), then the structural-but-mechanical
families. Within one family, loci are tried in source order.
"""
from __future__ import annotations

import importlib

from klineage.mechanisms.base import Applied, Feature, Kernel, Mechanism, NotApplicable

ORDER = (
    "cache_hint", "fast_math", "launch_bounds", "unroll", "restrict", "coarsening",
    "smem_padding", "vector_access", "warp_reduction", "smem_staging",
)
_MODULES = {
    "cache_hint": "cache_hint", "fast_math": "fast_math", "launch_bounds": "launch_bounds",
    "unroll": "unroll", "restrict": "restrict", "coarsening": "coarsening", "smem_padding": "smem_padding",
    "vector_access": "vector_access", "warp_reduction": "warp_reduction", "smem_staging": "smem_staging",
    "structural": "structural",
}


def _load(name: str) -> list[Mechanism]:
    mod = importlib.import_module(f"klineage.mechanisms.{_MODULES[name]}")
    return [obj() for obj in vars(mod).values()
            if isinstance(obj, type) and issubclass(obj, Mechanism) and obj is not Mechanism
            and obj.__module__ == mod.__name__ and obj.NAME]


def registry() -> dict[str, Mechanism]:
    """Every mechanism by NAME: the rewritable families in ORDER, then the structural detectors."""
    out: dict[str, Mechanism] = {}
    for name in (*ORDER, "structural"):
        for m in _load(name):
            if m.NAME in out:
                raise RuntimeError(f"two mechanisms named {m.NAME}: give each family its own NAME")
            out[m.NAME] = m
    return out


def detect_all(source: str | Kernel) -> list[Feature]:
    """All features of a kernel, every family, in registry order then source order."""
    k = source if isinstance(source, Kernel) else Kernel(source)
    feats: list[Feature] = []
    for m in registry().values():
        feats.extend(m.detect(k))
    return feats


__all__ = ["Applied", "Feature", "Kernel", "Mechanism", "NotApplicable", "ORDER", "registry", "detect_all"]
