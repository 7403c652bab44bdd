"""`__restrict__` on pointer parameters: the compiler may assume the pointers do not alias, keep
loaded values in registers across stores and use the read-only path.

Locus: one function (all of its restrict-qualified parameters together; removing it from one
parameter of several is not a separate optimization). Reoptimize qualifies the named parameters,
or every pointer parameter of the function when no configuration is given.
"""
from __future__ import annotations

from klineage.mechanisms.base import Applied, Feature, Kernel, Mechanism, NotApplicable, detail
from klineage.parse import syntax
from klineage.parse.syntax import Edit


def _params(k: Kernel):
    """(function node, function name, param name, declarator node, restrict qualifier node|None)."""
    out = []
    for caps in k.tree.matches("pointer_params"):
        fn, decl = caps["function"][0], caps["declarator"][0]
        quals = [c for c in decl.named_children if c.type == "type_qualifier" and c.text == b"__restrict__"]
        ident = decl
        while ident is not None and ident.type != "identifier":
            ident = ident.child_by_field_name("declarator")
        if ident is None:
            continue
        out.append((fn, syntax.function_name(fn), ident.text.decode(), decl, quals[0] if quals else None))
    return out


class Restrict(Mechanism):
    NAME = "restrict"
    DESCRIPTION = "__restrict__ pointer parameters (no-alias promise)"
    PRECONDITIONS = {
        "layout": [{"condition": "the restrict-qualified buffers do not overlap each other",
                    "fails_without": "the compiler may reorder or cache loads across stores to an aliased "
                                     "buffer: wrong values, silently"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        by_fn: dict[str, list] = {}
        for fn, name, pname, decl, q in _params(k):
            if q is not None:
                by_fn.setdefault(name, []).append((fn, pname))
        feats = []
        for name, items in by_fn.items():
            fn = items[0][0]
            sig = fn.child_by_field_name("declarator")
            feats.append(Feature(self.NAME, f"{name}:params", k.lines(sig), anchor="pointer parameters",
                                 detail=detail(params=",".join(p for _, p in items), count=len(items)),
                                 path=f"{name} > parameter list"))
        return feats

    def deoptimize(self, k: Kernel, feature: Feature) -> Applied | NotApplicable:
        fname = feature.locus.split(":")[0]
        quals = [(pname, decl, q) for fn, name, pname, decl, q in _params(k) if name == fname and q is not None]
        if not quals:
            return NotApplicable(f"{fname} has no __restrict__ parameter")
        edits = []
        for _, _, q in quals:
            end = q.end_byte
            while end < len(k.tree.data) and k.tree.data[end:end + 1] in (b" ", b"\t"):
                end += 1  # `float* __restrict__ x` -> `float* x`
            edits.append(Edit(q.start_byte, end, ""))
        fn = next(fn for fn, name, *_ in _params(k) if name == fname)
        sig = fn.child_by_field_name("declarator")
        new = k.tree.edit(edits)
        after_sig = Kernel(new)
        after_fn = next(f for f in syntax.functions(after_sig.tree) if syntax.function_name(f) == fname)
        return Applied(new, self.NAME, feature.locus, before=k.tree.text_of(sig),
                       after=after_sig.tree.text_of(after_fn.child_by_field_name("declarator")),
                       config={"params": [p for p, _, _ in quals]})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        params = _params(k)
        fname = locus.split(":")[0] if locus else next((n for fn, n, *_ in params
                                                        if "__global__" in syntax.function_qualifiers(fn)), None)
        if fname is None:
            return NotApplicable("no __global__ function with pointer parameters")
        wanted = set((config or {}).get("params") or [p for _, n, p, _, _ in params if n == fname])
        edits = []
        for fn, name, pname, decl, q in params:
            if name == fname and pname in wanted and q is None:
                star = next(c for c in decl.children if c.type == "*")
                edits.append(Edit(star.end_byte, star.end_byte, " __restrict__"))
                # `float* x` -> `float* __restrict__ x`; keep a single space before the name
                nxt = k.tree.data[star.end_byte:star.end_byte + 1]
                if nxt == b" ":
                    edits[-1] = Edit(star.end_byte, star.end_byte + 1, " __restrict__ ")
        if not edits:
            return NotApplicable(f"{fname} has no unqualified pointer parameter to mark __restrict__")
        fn = next(fn for fn, name, *_ in params if name == fname)
        new = k.tree.edit(edits)
        nk = Kernel(new)
        nfn = next(f for f in syntax.functions(nk.tree) if syntax.function_name(f) == fname)
        return Applied(new, self.NAME, f"{fname}:params", before=k.tree.text_of(fn.child_by_field_name("declarator")),
                       after=nk.tree.text_of(nfn.child_by_field_name("declarator")), config={"params": sorted(wanted)})
