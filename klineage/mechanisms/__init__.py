"""The mechanism registry: one module or package per family under klineage.mechanisms.families, each
declaring `FAMILY = Family(...)` (klineage.mechanisms.base.Family: everything known about the family),
and the families only a ladder names, as data in declared.toml there. Both are discovered on every
folder of the families package's path, so adding a family is adding a module (docs/adding-a-family.md).

`ORDER` is the backward search order of the rules proposer: the rewritable families by rank, so that
mechanisms that sit on top of others come off first (a cache hint wraps a load, so it goes before
the vectorized load it wraps; compiler annotations before the code structure they annotate). Within
one family, loci are tried in source order.
"""
from __future__ import annotations

import hashlib
import importlib
import pkgutil
from collections import OrderedDict

from klineage.mechanisms.base import Applied, Family, Feature, Kernel, Mechanism, NotApplicable

FAMILIES_PACKAGE = "klineage.mechanisms.families"
DECLARED_RANK = 1000  # the ladder-only families rank after every family module


def family_modules() -> list[str]:
    """The family modules under klineage.mechanisms.families (a module, or a package's __init__), by
    name; a name starting with `_` holds shared helpers, not a family."""
    pkg = importlib.import_module(FAMILIES_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def family_specs() -> dict[str, Family]:
    """Every family by name, in rank order: each family module's FAMILY, then declared.toml's."""
    from klineage.mechanisms.declared import declared_families
    found: list[Family] = []
    for module in family_modules():
        mod = importlib.import_module(f"{FAMILIES_PACKAGE}.{module}")
        fam = getattr(mod, "FAMILY", None)
        if not isinstance(fam, Family):
            raise RuntimeError(f"{mod.__name__} declares no FAMILY = Family(...): every module of "
                               f"{FAMILIES_PACKAGE} is one family (shared helpers go in a module named _NAME)")
        found.append(fam)
    found += declared_families(importlib.import_module(FAMILIES_PACKAGE).__path__, DECLARED_RANK)
    out: dict[str, Family] = {}
    for fam in sorted(found, key=lambda f: (f.rank, f.name)):
        if fam.name in out:
            raise RuntimeError(f"two families named {fam.name}: give each family its own NAME")
        out[fam.name] = fam
    return out


def registry() -> dict[str, Mechanism]:
    """Every mechanism by NAME, one per family, in rank order."""
    return {name: fam.mechanism() for name, fam in family_specs().items()}


def order() -> tuple[str, ...]:
    """The rules proposer's backward order: the families with a rewritable form, by rank."""
    return tuple(name for name, fam in family_specs().items() if fam.rewritable)


def __getattr__(name: str):
    if name == "ORDER":  # computed: a family module added is in the order
        return order()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


__all__ = ["Applied", "Family", "Feature", "Features", "Kernel", "Mechanism", "NotApplicable", "ORDER", "family_specs",
           "order", "registry", "detect_all", "detect_seen"]
