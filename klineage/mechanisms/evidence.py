"""Both kinds of evidence for every family, united: a feature is present when its source detector or
its compiler-evidence signature says so, and records which found it.

`evidence(source)` gives `Found` records: each source feature (klineage.mechanisms.detect_all) with
the compiler sites that confirm it ("both") or none ("source"), and one compiler-only feature
("compiler") per family, source function and instruction class the source detectors did not see
(locus `function:ptx:CLASS`, e.g. `row_sum:ptx:shfl.sync.bfly.b32`; not removable, since no rewrite
knows its text). A locus inside a `__device__` helper says so (`helper`, and the kernels it was
inlined into). When the source does not compile to PTX (or nvcc is missing) the compiler side is
empty and `compiler_error` says why: the features are the source detectors' alone.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

from klineage.gate.compile import DEFAULT_ARCH
from klineage.mechanisms import detect_all, registry
from klineage.mechanisms.base import Feature, Kernel, detail, squash
from klineage.mechanisms.compiled import CompiledKernel, Site, compile_kernel

SOURCE, COMPILER, BOTH = "source", "compiler", "both"


@dataclass(frozen=True)
class Found:
    feature: Feature
    by: str                               # "source" | "compiler" | "both"
    sites: tuple[Site, ...] = ()          # the compiler evidence, innermost line first
    helper: str = ""                      # the __device__ helper the locus sits in ("" in a kernel)
    inlined_into: tuple[str, ...] = ()    # kernels a helper's evidence was compiled into

    @property
    def key(self) -> tuple[str, str]:
        return self.feature.key

    def to_dict(self) -> dict:
        d = self.feature.to_dict()
        d["evidence"] = self.by
        if self.helper:
            d["helper"] = self.helper
            d["inlined_into"] = list(self.inlined_into)
        d["compiler"] = [{"lines": list(s.lines), "function": s.function, "kernel": s.kernel, "what": s.what}
                         for s in self.sites]
        return d


@dataclass
class Evidence:
    found: list[Found] = field(default_factory=list)
    compiled: CompiledKernel | None = None
    compiler_error: str = ""

    @property
    def features(self) -> list[Feature]:
        return [f.feature for f in self.found]

    def keys(self) -> set[tuple[str, str]]:
        return {f.key for f in self.found}

    def by_key(self) -> dict[tuple[str, str], Found]:
        return {f.key: f for f in self.found}


_CACHE: OrderedDict[str, Evidence] = OrderedDict()
_CACHE_MAX = 256


def evidence(source: str | Kernel, arch: str = DEFAULT_ARCH, compiler: bool = True) -> Evidence:
    """The united features of `source` (cached by content and arch). `compiler=False` gives the
    source detectors' features in the same form (every one "source")."""
    k = source if isinstance(source, Kernel) else Kernel(source)
    key = hashlib.sha256(f"{arch}\0{int(compiler)}\0{k.source}".encode()).hexdigest()
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    ev = _unite(k, compile_kernel(k, arch) if compiler else None)
    _CACHE[key] = ev
    while len(_CACHE) > _CACHE_MAX:
        _CACHE.popitem(last=False)
    return ev


def _function_of(f: Feature) -> str:
    return f.locus.split(":", 1)[0] if ":" in f.locus else ""


def _meets(site: Site, f: Feature, mode: str, ck: CompiledKernel) -> bool:
    if mode == "function":
        fn = _function_of(f)
        return fn == site.function or fn in {ck.function_at(ln) for ln in site.lines}
    a, b = f.lines
    return any(a <= ln <= b for ln in site.lines)


def _unite(k: Kernel, ck: CompiledKernel | None) -> Evidence:
    mechs = registry()
    src = detect_all(k)
    helpers = {fn.name for fn in k.sem.functions if fn.space == "device"}
    if ck is None or not ck.ok:
        found = [Found(f, SOURCE, helper=_function_of(f) if _function_of(f) in helpers else "") for f in src]
        return Evidence(found, ck, "" if ck is None else ck.reason)
    sites_by: dict[str, list[Site]] = {}
    failures = []
    for name, m in mechs.items():
        try:
            sites_by[name] = m.compiled(ck)
        except Exception as e:  # a signature that trips on unusual PTX must not take the features down
            sites_by[name] = []
            failures.append(f"the {name} signature failed: {type(e).__name__}: {e}")
    used: set[int] = set()
    found = []
    for f in src:
        mode = mechs[f.mechanism].COMPILED_MATCH if f.mechanism in mechs else "lines"
        hits = [s for s in sites_by.get(f.mechanism, []) if _meets(s, f, mode, ck)]
        used |= {id(s) for s in hits}
        fn = _function_of(f)
        kernels = tuple(sorted({s.kernel for s in hits if s.kernel and s.kernel != fn}))
        found.append(Found(f, BOTH if hits else SOURCE, tuple(hits), fn if fn in helpers else "", kernels))
    groups: dict[tuple[str, str, str], list[Site]] = {}
    for name, sites in sites_by.items():
        for s in sites:
            if id(s) not in used:
                groups.setdefault((name, s.function, _tag(s.what)), []).append(s)
    for (name, fn, tag), sites in sorted(groups.items(), key=lambda kv: (list(mechs).index(kv[0][0]), kv[0][1:])):
        lines = sorted({ln for s in sites for ln in s.lines[:1]})
        text = squash(k.tree.line_text(lines[0], lines[0])) if lines else ""
        feat = Feature(name, f"{fn}:ptx:{tag}", (lines[0], lines[-1]) if lines else (0, 0),
                       anchor=f"compiled {tag}", removable=False,
                       detail=detail(evidence=COMPILER, instructions=len(sites), what=sites[0].what,
                                     source_line=text[:160]),
                       path=f"{fn}{' (device helper)' if fn in helpers else ''} > compiled {tag}"
                            f"@L{lines[0] if lines else 0}")
        kernels = tuple(sorted({s.kernel for s in sites if s.kernel and s.kernel != fn}))
        found.append(Found(feat, COMPILER, tuple(sites), fn if fn in helpers else "", kernels))
    return Evidence(found, ck, "; ".join(failures))


def _tag(what: str) -> str:
    """The instruction class naming a compiler-only feature: the first opcode without its types."""
    first = what.split(" + ")[0].split(" ->")[0].split(",")[0].strip()
    parts = [p for p in first.split(".") if p and not p[0].isdigit() and p not in (
        "f32", "f16", "bf16", "f64", "b32", "b64", "u32", "s32", "u64", "s64", "b16", "u16", "s16", "b8", "u8", "s8")]
    return ".".join(parts) or first


def found_in(source: str | Kernel, arch: str = DEFAULT_ARCH) -> list[Found]:
    return evidence(source, arch).found
