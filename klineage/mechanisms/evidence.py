"""Both kinds of evidence for every family, united: a feature is present when its source detector or
its compiler-evidence signature says so, and records which found it.

`evidence(source)` gives `Found` records: each source feature (klineage.mechanisms.detect_seen: the
forms the rewrites take and the other idiom forms each family sees) with
the compiler sites that confirm it ("both") or none ("source"), and one compiler-only feature
("compiler") per family and compiled kernel the source detectors did not see
(locus `KERNEL:ptx:FAMILY`, e.g. `row_sum:ptx:warp_reduction`, per compiled kernel where the source
detectors see nothing of the family in the kernel's call tree; not removable, since no rewrite knows
its text). A locus inside a `__device__` helper says so (`helper`, and the kernels it was
inlined into). When the source does not compile to PTX (or nvcc is missing) the compiler side is
empty and `compiler_error` says why: the features are the source detectors' alone.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

from klineage.gate.compile import DEFAULT_ARCH, compiler_messages
from klineage.mechanisms import detect_seen, registry
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
_CACHE_MAX = 16  # an Evidence holds its parsed PTX (tens of MB for a large kernel): a walk reuses the last few


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


def _trees(k: Kernel) -> dict[str, set[str]]:
    """Each source function with the in-file functions it calls, transitively (what one compiled
    kernel holds once its helpers are inlined)."""
    from klineage.mechanisms.codescan import scan
    import re
    s = scan(k)
    names = re.compile(r"\b(" + "|".join(map(re.escape, sorted(s.by_name, key=len, reverse=True))) + r")\s*\(") \
        if s.by_name else None
    calls = {}
    for f in s.fns:
        calls.setdefault(f.name, set()).update(f.calls)
        if names is not None:  # calls made through macros (`#define LOAD4(p) load4(p)`)
            text = " ".join(s.expanded(i) for i in s.lines(f))
            calls[f.name].update(m.group(1) for m in names.finditer(text) if m.group(1) != f.name)
    out = {}
    for name in calls:
        seen, frontier = {name}, [name]
        while frontier:
            for c in calls.get(frontier.pop(), ()):
                if c not in seen:
                    seen.add(c)
                    frontier.append(c)
        out[name] = seen
    return out


def _closest(site: Site, feats: list[Feature], mode: str) -> Feature:
    """The source feature a site confirms: the one whose span holds one of its lines (whose function it
    is in, for function-scoped families), else the nearest."""
    for f in feats:
        if mode == "function" and _function_of(f) == site.function:
            return f
        if any(f.lines[0] <= ln <= f.lines[1] for ln in site.lines):
            return f
    return min(feats, key=lambda f: min((abs(ln - f.lines[0]) for ln in site.lines), default=0))


def _unite(k: Kernel, ck: CompiledKernel | None) -> Evidence:
    """Attach compiler sites to source features kernel by kernel. In each compiled kernel (a PTX
    function: the kernel with its helpers inlined), a family the source detectors see somewhere in the
    kernel's call tree is confirmed by the kernel's sites of that family (each attached to the nearest
    feature: line attribution moves with unrolling and inlining, presence in a kernel does not); a
    family they do not see there becomes one compiler-only feature for that kernel."""
    mechs = registry()
    src = detect_seen(k)
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
    trees = _trees(k)
    confirms: dict[int, list[Site]] = {}
    orphans: dict[tuple[str, str], list[Site]] = {}
    for name, sites in sites_by.items():
        mode = mechs[name].COMPILED_MATCH
        for s in sites:
            tree = trees.get(s.kernel, {s.kernel}) | {s.function}
            mine = [f for f in src if f.mechanism == name and (_function_of(f) in tree or not _function_of(f))]
            if mine:
                confirms.setdefault(id(_closest(s, mine, mode)), []).append(s)
            else:
                orphans.setdefault((name, s.kernel or s.function), []).append(s)
    found = []
    for f in src:
        hits = confirms.get(id(f), [])
        fn = _function_of(f)
        kernels = tuple(sorted({s.kernel for s in hits if s.kernel and s.kernel != fn}))
        found.append(Found(f, BOTH if hits else SOURCE, tuple(hits), fn if fn in helpers else "", kernels))
    for (name, kernel), sites in sorted(orphans.items(), key=lambda kv: (list(mechs).index(kv[0][0]), kv[0][1])):
        lines = sorted({s.line for s in sites if s.line})
        first = min(sites, key=lambda s: s.line or 0)
        where = sorted({s.function for s in sites})
        in_helper = next((w for w in where if w in helpers and w != kernel), "")
        text = squash(k.tree.line_text(first.line, first.line)) if first.line else ""
        feat = Feature(name, f"{kernel}:ptx:{name}", (lines[0], lines[-1]) if lines else (0, 0),
                       anchor=f"compiled {_tag(first.what)}", removable=False,
                       detail=detail(evidence=COMPILER, instructions=len(sites), what=first.what,
                                     functions=",".join(where), source_line=text[:160]),
                       path=f"{first.function}{' (device helper)' if first.function in helpers else ''} > "
                            f"compiled {_tag(first.what)}@L{first.line}")
        found.append(Found(feat, COMPILER, tuple(sorted(sites, key=lambda s: s.line)), in_helper,
                           (kernel,) if in_helper else ()))
    return Evidence(found, ck, "; ".join(failures))


def presence(ev: "Evidence") -> dict[tuple[str, str], tuple[bool, bool]]:
    """(family, compiled kernel) -> (the source detectors see the family in the kernel's call tree,
    the compiler does): what the audit compares across a step, robust to lines moving."""
    ck = ev.compiled
    if ck is None or not ck.ok:
        return {}
    trees = _trees(ck.k)
    out: dict[tuple[str, str], list[bool]] = {}
    kernels = {fn.base_name for fn in ck.module.functions}
    for kernel in kernels:
        tree = trees.get(kernel, {kernel})
        for f in ev.found:
            if f.by != COMPILER and _function_of(f.feature) in tree:
                out.setdefault((f.feature.mechanism, kernel), [False, False])[0] = True
    for f in ev.found:
        for s in f.sites:
            if s.kernel:
                out.setdefault((f.feature.mechanism, s.kernel), [False, False])[1] = True
    return {k: (v[0], v[1]) for k, v in out.items()}


def _tag(what: str) -> str:
    """The instruction class naming a compiler-only feature: the first opcode without its types."""
    first = what.split(" + ")[0].split(" ->")[0].split(",")[0].strip()
    parts = [p for p in first.split(".") if p and not p[0].isdigit() and p not in (
        "f32", "f16", "bf16", "f64", "b32", "b64", "u32", "s32", "u64", "s64", "b16", "u16", "s16", "b8", "u8", "s8")]
    return ".".join(parts) or first


def found_in(source: str | Kernel, arch: str = DEFAULT_ARCH) -> list[Found]:
    return evidence(source, arch).found


def features_report(source: str, arch: str = DEFAULT_ARCH, compiler: bool = True) -> dict:
    """Everything `klineage features` shows: every feature with its locus and which evidence found it,
    and per compiled function the evidence table (instruction classes with source lines, directives,
    registers, shared bytes, spills)."""
    ev = evidence(source, arch, compiler)
    ck = ev.compiled
    if not compiler:
        status = {"ok": False, "error": "not asked (--source-only)"}
    elif ck is None or not ck.ok:
        status = {"ok": False, "arch": arch, "error": ev.compiler_error or "the source does not compile to PTX",
                  "error_kind": ck.result.error_kind if ck is not None else None,
                  "messages": compiler_messages(ck.result.log) if ck is not None else []}
    else:
        status = {"ok": True, "error": ev.compiler_error, "arch": arch, "nvcc": ck.result.nvcc_version,
                  "cached": ck.result.cached}
    counts = {by: sum(f.by == by for f in ev.found) for by in (SOURCE, COMPILER, BOTH)}
    return {"compiler": status, "counts": counts, "features": [f.to_dict() for f in ev.found],
            "functions": ck.table() if ck is not None and ck.ok else []}

