"""`__launch_bounds__(MAX_THREADS[, MIN_BLOCKS])` on a `__global__` function: tells ptxas the block
size, so it can budget registers for that many threads (and a minimum occupancy).

Locus: the kernel. Deoptimize deletes the attribute; reoptimize restores the configuration's text,
or on natural code uses the block size of the kernel's `<<<grid, BLOCK ...>>>` launch when that is
an integer literal or a name (macro, constexpr, template parameter).
"""
from __future__ import annotations

import re

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, detail
from klineage.parse import syntax
from klineage.parse.syntax import Edit


def _bounds(k: Kernel):
    out = []
    for fn in syntax.functions(k.tree):
        lb = next((c for c in fn.children if c.type == "launch_bounds"), None)
        if lb is not None and k.live(fn):
            out.append((syntax.function_name(fn), fn, lb))
    return out


class LaunchBounds(Mechanism):
    NAME = "launch_bounds"
    DESCRIPTION = "__launch_bounds__ on a kernel (register budget for the real block size)"
    PRECONDITIONS = {
        "pipeline": [{"condition": "every launch of the kernel uses at most MAX_THREADS threads per block",
                      "fails_without": "the launch fails with cudaErrorLaunchOutOfResources / invalid configuration"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        out = [Feature(self.NAME, f"{name}:launch_bounds", k.lines(lb), anchor="kernel attribute",
                       detail=detail(args=re.sub(r"\s+", " ", k.tree.text_of(lb)[len("__launch_bounds__"):]).strip()),
                       path=f"{name} > __launch_bounds__")
               for name, fn, lb in _bounds(k)]
        return out

    def detect_more(self, k: Kernel) -> list[Feature]:
        return _through_macros(k, {f.locus for f in self.detect(k)})

    COMPILED_MATCH = "function"

    def compiled(self, ck) -> list:
        """Kernels whose PTX carries the launch-bounds directives (.maxntid, .minnctapersm)."""
        out = []
        for fn in ck.module.functions:
            got = {d: v for d, v in fn.directives.items() if d in ("maxntid", "minnctapersm")}
            if fn.kind == "entry" and got:
                site = ck.site(self.NAME, fn, [], what=", ".join(f".{d} {v}" for d, v in got.items()))
                if site is not None:
                    out.append(site)
        return out

    def deoptimize(self, k: Kernel, feature: Feature):
        name = feature.locus.split(":")[0]
        hit = next(((fn, lb) for n, fn, lb in _bounds(k) if n == name), None)
        if hit is None:
            return NotApplicable(f"{name} has no __launch_bounds__")
        fn, lb = hit
        data = k.tree.data
        prev = lb.prev_sibling
        prefix = data[prev.end_byte:lb.start_byte].decode() if prev is not None else ""
        head = data[fn.start_byte:lb.start_byte].decode()
        return Applied(k.tree.edit([Edit(lb.start_byte, lb.end_byte, "")]), self.NAME, feature.locus,
                       before=head + k.tree.text_of(lb), after=head.rstrip(),
                       config={"text": k.tree.text_of(lb), "kernel": name, "prefix": prefix})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        name = config.get("kernel") or (locus.split(":")[0] if locus else None)
        kernels = [f for f in syntax.functions(k.tree) if "__global__" in syntax.function_qualifiers(f)]
        fn = next((f for f in kernels if name is None or syntax.function_name(f) == name), None)
        if fn is None:
            return NotApplicable(f"no __global__ function {name or ''}".strip())
        if any(c.type == "launch_bounds" for c in fn.children):
            return NotApplicable(f"{syntax.function_name(fn)} already has __launch_bounds__")
        name = syntax.function_name(fn)
        text = config.get("text")
        if not text:
            block = _launch_block(k, name)
            if block is None:
                return NotApplicable(f"the block size of {name}'s launch is not a literal or a name")
            text = f"__launch_bounds__({block})"
        decl = fn.child_by_field_name("declarator")
        prev = decl.prev_sibling
        gap = k.tree.data[prev.end_byte:decl.start_byte].decode()
        prefix = config.get("prefix")
        if prefix is not None and gap.startswith(prefix):
            at, ins = prev.end_byte + len(prefix.encode()), text  # exact inverse of deoptimize
        else:
            at, ins = prev.end_byte, " " + text.strip()
        new = k.tree.edit([Edit(at, at, ins)])
        short = k.tree.text_of(decl).split("(")[0]
        return Applied(new, self.NAME, f"{name}:launch_bounds", before=short, after=text.strip() + " " + short,
                       config={"text": text.strip(), "kernel": name})


def _through_macros(k: Kernel, seen: set[str]) -> list[Feature]:
    """Kernels whose launch bounds come from a project macro (`__global__ LAUNCH_BOUNDS(256) void f`):
    seen, but not rewritten (the macro's text is not the kernel's)."""
    macros = {name: body for name, body in _macro_bodies(k).items() if "__launch_bounds__" in body}
    if not macros:
        return []
    alt = "|".join(map(re.escape, sorted(macros)))
    out = []
    for fn in syntax.functions(k.tree):
        decl = fn.child_by_field_name("declarator")
        name = syntax.function_name(fn)
        head = k.tree.data[fn.start_byte:decl.start_byte].decode() if decl is not None else ""
        m = re.search(rf"\b({alt})\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", head)
        if m is None or f"{name}:launch_bounds" in seen or not k.live(fn):
            continue
        line = fn.start_point.row + 1 + head[:m.start()].count("\n")
        out.append(Feature(LaunchBounds.NAME, f"{name}:launch_bounds", (line, line),
                           anchor="kernel attribute", detail=detail(args=m.group(2).strip(), macro=m.group(1)),
                           removable=False, path=f"{name} > {m.group(1)}(...) = __launch_bounds__"))
    return out


def _macro_bodies(k: Kernel) -> dict[str, str]:
    from klineage.mechanisms.codescan import scan
    return scan(k).macros


def _launch_block(k: Kernel, name: str) -> str | None:
    m = re.search(re.escape(name) + r"\s*(?:<[^<>]*>)?\s*<<<\s*[^,]+,\s*([A-Za-z_]\w*|\d+)\s*[,>]", k.source)
    if not m:
        return None
    block = m.group(1)
    if block.isdigit() or re.search(r"#\s*define\s+" + block + r"\b", k.source) or re.search(
            r"constexpr\s+\w+\s+" + block + r"\s*=", k.source):
        return block
    lit = re.search(r"\b(?:const\s+)?int\s+" + block + r"\s*=\s*(\d+)\s*;", k.source)
    return lit.group(1) if lit else None  # a runtime variable cannot appear in the attribute


FAMILY = Family(
    LaunchBounds, rank=30,
    forms=(
        Form("__launch_bounds__(MAX_THREADS[, MIN_BLOCKS]) on a __global__ function"),
        Form("launch bounds through a project macro (__global__ LAUNCH_BOUNDS(256) void f)", rewritable=False),
    ),
    compiler="the .maxntid / .minnctapersm directives of a kernel's PTX entry",
    forward=("reoptimize",),
    anchor_query="(function_definition (launch_bounds) @bounds)",
    addresses=frozenset({"compute", "latency", "memory"}),
    rules=("launch_bounds",),
)
