"""Vectorized global accesses: one 8- or 16-byte (or packed 4-byte) load or store through a vector
type (`float4`, `float2`, `int4`, `uint4`, `int2`, `uint2`, `double2`, `__half2`, `__nv_bfloat162`,
...) instead of one access per component.

Detected: a dereference `*A`, `p[i]` or `*(p + i)` of a pointer whose pointee is a vector type (the
type of a parameter or local variable, of a `reinterpret_cast<const float4*>(...)` / C cast, or of
pointer arithmetic on one), in device code, and the same accesses made through a cache-hint
intrinsic (`__ldg(p)`, `__ldcs(p)`, `__stcs(p, v)`, ...).

Locus: function, `load` or `store`, and the address text (`rs_load4:load:p`). A subscript `p[i]`
is named by its address `p + i` (`p + (i + 1)` for a compound index), the way the cache_hint family
writes it, so a load keeps its name when its cache hint comes off.

Deoptimize replaces the access by a call of a scalar helper inserted once per vector type and
direction, before the first function that accesses that type (after the includes):
`kl_scalar_load_float4(A)` reads the four floats through `const float*` and rebuilds the vector
with `make_float4`; `*A = v;` becomes `kl_scalar_store_float4(A, v);`, four scalar stores. A hinted
access is not rewritten: the cache hint (cache_hint) comes off first. Reoptimize turns a helper
call back into the vector access (the exact original text with the configuration; `*A` / `*A = v`
on natural code that calls the helpers) and deletes the helper once nothing calls it. Turning
hand-written per-component scalar code into a vector access is not mechanical (alignment and
contiguity cannot be read off the text) and is not attempted.

On natural code with no helper call (and no locus or helper configuration to restore), reoptimize
vectorizes a one-element-per-thread kernel (`klineage.mechanisms.elementwise`): each thread takes a
16-byte vector of every pointer accessed at the flat index, read and written through
`reinterpret_cast` to `float4` / `uint4` (8 bf16 or fp16 packed) / `int4` / `double2`, the body
applied per lane, a scalar path for the count's tail and for base pointers that are not 16-byte
aligned, and the host grid divided by the lane count. The per-thread count it introduces is 1
(coarsening off); the coarsening family raises it.
"""
from __future__ import annotations

from klineage.mechanisms.base import Applied, Family, Feature, Form, Kernel, Mechanism, NotApplicable, squash
from klineage.mechanisms.vector_forms import (VECTOR_TYPES, _accesses, _helper_calls, _helper_defs, _other_forms,
                                              helper_name, helper_text, insert_at, line_start, paren, statement_of,
                                              top_level, vector_features)
from klineage.parse import syntax
from klineage.parse.syntax import Edit


# ---------------------------------------------------------------- the family

class VectorAccess(Mechanism):
    NAME = "vector_access"
    DESCRIPTION = "vectorized global loads/stores (float4, float2, int4, uint4, half2, bfloat162, ...)"
    PRECONDITIONS = {
        "data_types": [{"condition": "the data is read and written as whole vectors of the element type "
                                     "(e.g. 4 floats or 8 bf16 packed into a uint4)",
                        "fails_without": "a reinterpretation across mismatched element types computes garbage"}],
        "layout": [{"condition": "every vector address is aligned to the vector size (16 bytes for float4/uint4, "
                                 "8 for float2, 4 for half2) and the elements are contiguous",
                    "fails_without": "misaligned vector access: cudaErrorMisalignedAddress at run time"},
                   {"condition": "the element count is a multiple of the vector width, or a scalar tail "
                                 "handles the remainder",
                    "fails_without": "the last vector reads or writes past the end of the buffer"}],
        "hardware": [{"condition": "128-bit load/store instructions (LDG.128 / STG.128), any CUDA GPU",
                      "fails_without": "nothing: every supported GPU has them"}],
    }

    def detect(self, k: Kernel) -> list[Feature]:
        return vector_features(k)

    def detect_more(self, k: Kernel) -> list[Feature]:
        return _other_forms(k, {f.locus.split("#")[0] for f in self.detect(k)})

    def compiled(self, ck) -> list:
        """Global (or generic) loads and stores of two or more lanes (.v2 / .v4) or 16 bytes (.b128).
        A 4-byte packed access (half2) looks like any 32-bit access: the source detector sees it."""
        out = []
        for fn in ck.module.functions:
            for i in fn.instrs:
                if i.op in ("ld", "st") and i.space in ("global", "generic") and \
                        (i.vector >= 2 or i.access_bytes >= 16):
                    site = ck.site(self.NAME, fn, [i])
                    if site is not None:
                        out.append(site)
        return out

    def deoptimize(self, k: Kernel, feature: Feature):
        a = dict(_accesses(k)).get(feature.locus)
        if a is None:
            return NotApplicable(f"no vector access at {feature.locus}")
        if a.hint:
            return NotApplicable(f"the {a.kind} goes through the cache hint {a.hint}: remove the cache hint "
                                 f"first (cache_hint), then the vector access")
        if a.vector not in VECTOR_TYPES:
            return NotApplicable(f"no scalar helper for {a.vector}")
        name = helper_name(a.kind, a.vector)
        if a.kind == "store":
            if a.target.parent is None or a.target.parent.type != "expression_statement":
                return NotApplicable("a vector store used as a value cannot become a helper call")
            call = f"{name}({a.address}, {a.value})"
        else:
            call = f"{name}({a.address})"
        edits = [Edit(a.target.start_byte, a.target.end_byte, call)]
        defs = _helper_defs(k, name)
        shift = 0
        if defs:
            if top_level(defs[0]).start_byte > top_level(a.fn).start_byte:
                return NotApplicable(f"{name} is defined after {a.function}: it cannot be called there")
        else:
            # before the first function accessing this vector type this way (a stable place: the set
            # of such functions does not change when one of their accesses is rewritten)
            first = min((x.fn for _, x in _accesses(k) if (x.kind, x.vector) == (a.kind, a.vector)),
                        key=lambda f: f.start_byte)
            at = insert_at(k, first)
            text = helper_text(a.kind, a.vector)
            edits.append(Edit(at, at, text))
            shift = len(text.encode())
        stmt = statement_of(a.target)
        new = k.tree.edit(edits)
        nk = Kernel(new)
        same = [c for c, *_, f in _helper_calls(nk) if f is not None and syntax.function_name(f) == a.function
                and squash(nk.tree.text_of(c)) == squash(call)]
        ours = next(i for i, c in enumerate(same) if c.start_byte == a.target.start_byte + shift)
        return Applied(new, self.NAME, feature.locus, before=k.tree.text_of(stmt),
                       after=nk.tree.text_of(statement_of(same[ours])),
                       config={"kind": a.kind, "vector": a.vector, "function": a.function,
                               "access": k.tree.text_of(a.target), "call": call, "ordinal": ours,
                               "helper": name, "inserted_helper": shift > 0})

    def reoptimize(self, k: Kernel, locus: str | None = None, config: dict | None = None):
        config = config or {}
        calls = [c for c in _helper_calls(k) if c[4] is not None and k.live(c[0])]
        if not calls:
            if locus is None and not config.get("call"):
                # natural code with nothing to restore: a one-element-per-thread kernel is vectorized
                from klineage.mechanisms.elementwise_rewrite import vectorize
                got = vectorize(k)
                if got.ok:
                    return got
                return NotApplicable(f"no kl_scalar_* helper call to turn back into a vector access, and {got.reason}")
            return NotApplicable("no kl_scalar_* helper call to turn back into a vector access")

        def natural_locus(c):
            call, kind, vec, argv, f = c
            return f"{syntax.function_name(f)}:{kind}:{squash(k.tree.text_of(argv[0]))}" if argv else ""

        pick = None
        if config.get("call"):
            same = [c for c in calls if syntax.function_name(c[4]) == config.get("function")
                    and squash(k.tree.text_of(c[0])) == squash(config["call"])]
            if same:
                pick = same[min(int(config.get("ordinal", 0)), len(same) - 1)]
        elif locus:
            pick = next((c for c in calls if natural_locus(c) == locus.split("#")[0]), None)
        else:
            pick = calls[0]
        if pick is None:
            return NotApplicable(f"no helper call at {locus or config.get('call')}")
        call, kind, vec, argv, f = pick
        want = 2 if kind == "store" else 1
        if len(argv) != want:
            return NotApplicable(f"{k.tree.text_of(call)} does not have {want} argument(s)")
        if config.get("access") and config.get("call"):
            text = config["access"]
        elif kind == "load":
            text = "*" + paren(k.tree.text_of(argv[0]))
        else:
            if call.parent is None or call.parent.type != "expression_statement":
                return NotApplicable("a helper store used as a value cannot become an assignment")
            text = f"*{paren(k.tree.text_of(argv[0]))} = {k.tree.text_of(argv[1])}"
        edits = [Edit(call.start_byte, call.end_byte, text)]
        name = helper_name(kind, vec)
        others = [c for c in _helper_calls(k) if c[0] != call and helper_name(c[1], c[2]) == name]
        dropped = False
        if not others:
            for d in _helper_defs(k, name):
                node = top_level(d)
                end = node.end_byte + (1 if k.tree.data[node.end_byte:node.end_byte + 1] == b"\n" else 0)
                start = line_start(k.tree.data, node.start_byte)
                if k.tree.data[start:node.start_byte].strip():
                    start = node.start_byte
                edits.append(Edit(start, end, ""))
                dropped = True
        stmt = statement_of(call)
        stmt_text = k.tree.text_of(stmt)
        new = k.tree.edit(edits)
        fname = syntax.function_name(f)
        out_locus = locus or f"{fname}:{kind}:{squash(k.tree.text_of(argv[0]))}"
        return Applied(new, self.NAME, out_locus, before=stmt_text,
                       after=stmt_text.replace(k.tree.text_of(call), text, 1),
                       config={"kind": kind, "vector": vec, "function": fname, "helper": name,
                               "dropped_helper": dropped})


FAMILY = Family(
    VectorAccess, rank=80,
    forms=(
        Form("a dereference (*A, p[i], *(p + i)) of a pointer to a vector type (float4, float2, int4, uint4, "
             "__half2, ...), also through a cache-hint intrinsic"),
        Form("hand-written PTX .v2 / .v4 global loads and stores", rewritable=False),
        Form("accesses through a pointer to an aligned pack struct", rewritable=False),
    ),
    compiler="global loads and stores of two or more lanes (.v2 / .v4) or 16 bytes (.b128)",
    forward=("reoptimize", "shape"),
    anchor_query="(pointer_expression argument: (_) @ptr) ; pointer of vector type (libclang)",
    addresses=frozenset({"memory"}),
    rules=("vector_cast", "dtype_intrinsics"),
)
